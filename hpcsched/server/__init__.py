"""`hpcsched server`: runs jobs for real in real time, driving the same scheduling core."""
