"""The end-to-end check: the compiled pick timed side by side against whole-model runs."""
