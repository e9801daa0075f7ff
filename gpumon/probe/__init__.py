"""The torch probe: a child process that checks torch on one GPU (issue 3)."""
