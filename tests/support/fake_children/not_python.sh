# Stands in for an interpreter that cannot run the probe at all (a broken env wrapper).
echo "env-wrapper: python: command not found" >&2
exit 127
