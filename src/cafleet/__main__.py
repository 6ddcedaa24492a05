"""`python -m cafleet`: the command line, as the `cafleet` script runs it."""

from cafleet.cli.main import main

raise SystemExit(main())
