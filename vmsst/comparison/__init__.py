"""The comparison harness: objectives trained and evaluated side by side."""
