"""autosched.lower"""
