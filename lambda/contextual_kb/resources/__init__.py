"""CloudFormation custom resources the stack runs (each a small function of its own, Python 3.13): they
import nothing else of the package, and their asset holds this part alone."""
