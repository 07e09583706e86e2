import sys

from autosched.cli import main

sys.exit(main())
