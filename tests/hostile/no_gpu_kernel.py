"""What an old framework prints on a GPU it has no kernels for, then a crash."""
import sys

sys.stderr.write("RuntimeError: CUDA error: no kernel image is available for execution on "
                 "the device\n")
sys.exit(1)
