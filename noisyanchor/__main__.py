from noisyanchor.cli import main

raise SystemExit(main())
