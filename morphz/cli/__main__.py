from morphz.cli.main import main

main()
