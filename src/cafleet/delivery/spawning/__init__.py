"""Members' panes coming and going: where a new pane opens and whether there is room for
it, member creation (here or on another host) and deletion, and a fleet restored after its
panes are gone (docs/delivery.md)."""
