"""What the command line says about itself, generated from the argparse parser so that it
never drifts from it: shell completions (``gpumon --print-completion bash|zsh|fish``,
:mod:`.completion`) and the man page (``gpumon --print-man``, :mod:`.man_page`), both built
from :func:`.model.read_parser`. Imported only for those two options: ``gpumon status``
never loads it.
"""
