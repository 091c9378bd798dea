# Lit configuration for collage_mlir. Run with `make lit` (or `lit -sv test/lit`).
# Tools (collage-opt, collage-mlir, filecheck) come from the Python environment running lit.
import os
import shutil
import sys

import lit.formats

config.name = "collage_mlir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "Inputs", "Output"]
config.test_source_root = os.path.dirname(__file__)

bindir = os.path.dirname(sys.executable)
config.environment["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
config.environment["PYTHONUNBUFFERED"] = "1"
for var in ("HOME", "XDG_CACHE_HOME", "COLLAGE_CACHE"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
config.substitutions.append(("%PYTHON", sys.executable))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
for tool in ("collage-opt", "collage-mlir", "filecheck"):
    if shutil.which(tool, path=config.environment["PATH"]) is None:
        lit_config.fatal(f"{tool} not found; run `make test` to build the environment")
