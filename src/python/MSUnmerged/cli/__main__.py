import sys

from MSUnmerged.cli import main

sys.exit(main())
