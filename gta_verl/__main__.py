import sys

from gta_verl.cli import main

sys.exit(main())
