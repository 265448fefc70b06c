"""Choosing what each group of users reports: CALM's error model and Algorithm 1, covering
designs, and planning for a stated workload."""
