"""Entry point: ``python -m publish``."""

from publish.cli import main

raise SystemExit(main())
