"""Members' panes coming and going: where a new pane opens and whether there is room for
it, member creation and deletion, the operator's capture and prompt, and a fleet restored
after its panes are gone (docs/delivery.md)."""
