"""autosched.search"""
