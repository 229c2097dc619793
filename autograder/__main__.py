"""Entry point: ``python -m autograder``."""

from autograder.cli import main

raise SystemExit(main())
