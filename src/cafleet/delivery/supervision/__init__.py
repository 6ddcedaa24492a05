"""Watching over a fleet: the members' states (``liveness``), the fleet keeper's loop
(``keeper``) and what other commands need of it (``keeper_control``), the Director's
notices and their posts out, ``fleet watch``, and the keeper's revivals (docs/delivery.md)."""
