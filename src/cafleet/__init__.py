"""cafleet: message broker and member registry for fleets of coding agents."""

__version__ = "0.1.0"
