"""autosched.schedule"""
