"""Getting a message's preview into a recipient's pane: rendering and sanitising the
preview, serialising keystrokes with the pane-input lock, reading the pane's state and
submitting the text (docs/delivery.md); and the operations that combine the broker with
panes: the send path's drain, member creation and deletion, `fleet watch`, wait and
listen. The layer reads and writes the database only through the broker, never with its
own SQL (docs/architecture.md)."""
