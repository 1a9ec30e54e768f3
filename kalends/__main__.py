import sys

from kalends.cli import main

sys.exit(main())
