from refagent.cli import main

raise SystemExit(main())
