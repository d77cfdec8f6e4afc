"""What both command-line tools share outside the trace contract: the click kit and atomic file writing."""
