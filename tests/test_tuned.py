"""Issue #36: every tuned constant lives in core/tuned.py, with its provenance, and the
modules that use it read it from there."""

from __future__ import annotations

import importlib

from dpmarginals.core import tuned

#: (module, the name it uses) for each entry of TUNED that a module re-exports.
USES = {
    "PHASE_SHARE": ("dpmarginals.local.adaptive", "PHASE_SHARE"),
    "PHASES": ("dpmarginals.local.adaptive", "PHASES"),
    "PHASE1_GROUP_USERS": ("dpmarginals.local.adaptive", "PHASE1_GROUP_USERS"),
    "ORDER_DECAY": ("dpmarginals.planning.optimal", "ORDER_DECAY"),
    "CAPACITY_ORDERS": ("dpmarginals.inference.shrinkage", "CAPACITY_ORDERS"),
    "KEEP": ("dpmarginals.inference.cliques", "KEEP"),
    "ITERS": ("dpmarginals.inference.pgm", "ITERS"),
    "DUAL_FRACTION": ("dpmarginals.inference.consistency", "DUAL_FRACTION"),
    "DETECTION": ("dpmarginals.inference.energies", "DETECTION"),
    "LOCATION_MIN_BLOCKS": ("dpmarginals.inference.location_prior", "MIN_BLOCKS"),
    "LOCATION_LIMIT": ("dpmarginals.inference.location_prior", "LIMIT"),
    "LOCATION_NORMALITY": ("dpmarginals.inference.location_prior", "NORMALITY"),
    "CALM_PGM_PRIORS": ("dpmarginals.local.calm_pgm", "CALM_PGM_PRIORS"),
}


def test_modules_read_the_tuned_constants():
    for name, (module, attr) in USES.items():
        assert getattr(importlib.import_module(module), attr) is tuned.TUNED[name].value, name


def test_every_constant_has_its_provenance():
    for name, entry in tuned.TUNED.items():
        assert entry.chosen_on and entry.tried and entry.measure, name
        assert getattr(tuned, name) == entry.value, name
        assert entry.module.endswith(".py"), name
