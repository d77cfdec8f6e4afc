"""How faithful the replay is: live runs beside the replay of their trace, the tolerances and the printed check."""
