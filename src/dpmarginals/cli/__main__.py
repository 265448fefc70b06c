"""``python -m dpmarginals.cli``."""

from .commands import main

raise SystemExit(main())
