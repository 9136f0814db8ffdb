"""The cleanup worker that runs at the site: standard library only, Python 3.9 or newer.

Shipped as one zipapp (MSUnmerged.jobs.workerpkg.build_worker); modules import each other
relatively so the package works under any name.
"""
