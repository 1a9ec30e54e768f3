import sys

from kalends.service.cli import main

sys.exit(main())
