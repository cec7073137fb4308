from specconsole.cli import main

raise SystemExit(main())
