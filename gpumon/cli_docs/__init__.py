"""Shell completions (:mod:`.completion`) and the man page (:mod:`.man_page`), both made
from the argparse parser (:func:`.model.read_parser`); imported only for the options that
print them."""
