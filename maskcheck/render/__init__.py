"""Terminal output: the Rich report of `inspect`, mask pictures, and the one Console factory.

Renderers return Rich renderables and never print; only `commands/` writes them out.
"""
