"""`python -m evaluator ...` is the `qashift` command."""

from evaluator.cli.main import main

if __name__ == "__main__":
    main()
