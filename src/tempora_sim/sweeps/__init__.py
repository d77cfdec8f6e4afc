"""The sweep: its options, the traces and their cache, the replay over every grid value, scenarios, synthetic traces and the v1 → v2 migration."""
