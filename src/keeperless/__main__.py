import sys

from keeperless.cli.main import main

sys.exit(main())
