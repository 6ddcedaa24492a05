"""Getting a message's preview into a recipient's pane: rendering and sanitising the
preview, serialising keystrokes with the pane-input lock, reading the pane's state and
submitting the text (spec §4.5-§4.8). Nothing here touches the database."""
