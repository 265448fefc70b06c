"""Linux's ``vm.max_map_count`` and long AIM runs.

XLA maps memory for every program it compiles, and AIM compiles fits round after round:
ACS (d = 23) at eps = 10 reached the default 65,530 after ~55 min and aborted with "LLVM
ERROR: Unable to allocate section memory"; one worker held 9,662 mappings after 80 s.
"""

from __future__ import annotations

import warnings
from pathlib import Path

__all__ = ["LONG_AIM_ROUNDS", "MIN_MAP_COUNT", "check_map_count"]

#: The limit below which long AIM runs are warned about.
MIN_MAP_COUNT = 262_144
#: Rounds from which AIM runs long enough to reach that limit.
LONG_AIM_ROUNDS = 200


def check_map_count(rounds: int, path: Path = Path("/proc/sys/vm/max_map_count"),
                    method: str = "aim") -> None:
    """Warn before a long run of ``rounds`` compiled fits on a Linux system whose
    ``vm.max_map_count`` is low."""
    if rounds < LONG_AIM_ROUNDS or not path.exists():
        return
    try:
        limit = int(path.read_text().strip())
    except (OSError, ValueError):
        return
    if limit < MIN_MAP_COUNT:
        warnings.warn(f"{method}: {rounds} rounds may exceed this system's vm.max_map_count "
                      f"({limit}) and abort with 'LLVM ERROR: Unable to allocate section "
                      f"memory'; raise it first (sudo sysctl -w vm.max_map_count="
                      f"{MIN_MAP_COUNT * 4}) or pass fewer --rounds", RuntimeWarning,
                      stacklevel=3)
