from mathagent.cli import main

raise SystemExit(main())
