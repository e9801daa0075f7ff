"""The Textual dashboard. Imported only by the dashboard path of the CLI."""
