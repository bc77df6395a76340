import sys

from jfed.cli.main import main

sys.exit(main())
