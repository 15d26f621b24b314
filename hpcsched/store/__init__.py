"""The site on disk: its configuration, the journaled state store, the job directories.
Imports the core and `config`, never the commands or the server."""
