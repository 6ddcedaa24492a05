from cafleet.cli.main import main

raise SystemExit(main())
