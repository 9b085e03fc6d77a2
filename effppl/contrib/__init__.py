"""`effppl.contrib`: NumPyro's `numpyro.contrib` names that effppl models need."""
