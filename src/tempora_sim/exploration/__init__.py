"""The interactive page: its data computed from the traces, and the one offline HTML file that shows it."""
