"""One module per page or API of the web app; each view reads what it needs from `web_context`."""
