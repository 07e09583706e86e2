"""autosched.codegen"""
