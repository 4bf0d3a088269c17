"""``python -m tapegrad.abi --write | --check``: write the kernel-ABI header, or check it is current."""
from tapegrad.abi import main

raise SystemExit(main())
