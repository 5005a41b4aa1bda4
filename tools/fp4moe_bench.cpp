// placeholder: being written (issue 2)
int main() { return 0; }
