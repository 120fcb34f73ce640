"""Never finish."""
import time

print("sleeping", flush=True)
time.sleep(3600)
