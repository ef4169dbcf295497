from maskcheck.cli import main

raise SystemExit(main())
