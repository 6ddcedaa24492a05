"""``python -m cafleet.agents.standin``: run the stand-in agent (:mod:`.program`)."""

from cafleet.agents.standin.program import main

raise SystemExit(main())
