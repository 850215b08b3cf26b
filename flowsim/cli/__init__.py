"""The `flowsim` command (`flowsim = "flowsim.cli:main"`; `python -m flowsim.cli` too).

    command.py      argparse, messages and exit codes over the library: the commands
    lifecycle.py    the command's process: exit codes, stop requests (SIGTERM, Ctrl-C),
                    loading the engine, leaving, disk-failure messages
    show.py         what `flowsim show` prints of a scenario, before anything is run
    inspection.py   what `flowsim inspect` prints of an archive
    submit.py       `flowsim submit`: a Slurm job array of a scenario's parts and their merge
    __main__.py     `python -m flowsim.cli`
"""

from .command import main as main
