from specconsole.launch import main

raise SystemExit(main())
