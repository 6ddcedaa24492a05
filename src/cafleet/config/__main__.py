"""``python -m cafleet.config --markdown | --write-readme README.md``: the README's
configuration tables (:mod:`cafleet.config.readme_table`)."""

import sys

from cafleet.config.readme_table import markdown, replace_table
from cafleet.readme import generator_main

raise SystemExit(generator_main(sys.argv[1:], "cafleet.config", markdown, replace_table))
