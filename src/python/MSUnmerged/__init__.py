"""MSUnmerged: clean /store/unmerged at CMS sites with jobs that run at the site."""

__version__ = "0.1.0"  # setup.py reads it from here
