// placeholder: being written (issue 2)
